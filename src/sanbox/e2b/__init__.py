"""E2B's SDK against Sanbox: its control API (`api`, under /e2b) and each sandbox's envd
(`gateway`: process and filesystem services over Connect-RPC with the JSON codec, `/files`,
`/health`), mapped onto computers through the control plane's front door."""
