"""Templates users write: the spec format (`spec`), read and checked without the server, so the
CLI can refuse a bad spec with its line before anything is sent."""
