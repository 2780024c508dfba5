"""``python -m advisor``."""

from advisor.app.cli import main

main()
