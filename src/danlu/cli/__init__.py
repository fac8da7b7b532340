"""The ``danlu`` command line: thin Typer commands that parse, call one service or API, format."""
