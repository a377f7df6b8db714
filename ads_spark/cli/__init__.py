"""The ``ads`` command line: ``main.py`` builds the parser, one ``*_cmd`` module per command family."""
