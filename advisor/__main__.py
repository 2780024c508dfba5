"""``python -m advisor``."""

from advisor.app.entry import main

main()
