"""Sanbox's MCP server: the tools (`tools.py`, written once against the async SDK) and two doors,
`sanbox mcp` over stdio (`stdio.py`) and streamable HTTP at `/mcp` on the API server (`http.py`,
which loads the MCP library at its first request).
"""
