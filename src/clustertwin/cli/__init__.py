"""Command-line interface (typer + rich). Renders model results; holds no model logic."""
