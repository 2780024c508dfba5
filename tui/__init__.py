"""The Textual terminal wizard over the advisor engine (``advisor tui``). Nothing imports it but the CLI."""
