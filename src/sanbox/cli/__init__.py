"""The `sanbox` command line (typer + rich): one module per noun."""
