"""The ``streamscale`` command line: one module per command group."""
