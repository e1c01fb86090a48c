"""Host-side package fetching for template builds: the host downloads what an apt, pip or npm
step needs, the build pushes the bundle into the build computer, and the guest installs it
offline (guests never reach a package registry).

    bundle = fetch_apt(["jq"], guest_dpkg_status, cache_dir)   # or fetch_pip / fetch_npm
    push every file of bundle.path to bundle.guest_dir, then run bundle.install in the guest

Bundles are cached by content under `cache_dir` (`fetch_common`); each kind has its module:
`fetch_apt`, `fetch_pip`, `fetch_npm`. Failures raise `FetchError` (a `BuildStepError`) with a
one-line reason; a missing host tool raises `MissingToolError`."""

from .fetch_apt import MAX_STATUS_BYTES, fetch_apt
from .fetch_common import DEFAULT_MAX_BYTES, Bundle, FetchError
from .fetch_npm import fetch_npm
from .fetch_pip import fetch_pip

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_STATUS_BYTES",
    "Bundle",
    "FetchError",
    "fetch_apt",
    "fetch_npm",
    "fetch_pip",
]
