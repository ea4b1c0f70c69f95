"""``python -m simspec.cli``: the same as the ``simspec`` command."""

from simspec.cli.main import main

main()
