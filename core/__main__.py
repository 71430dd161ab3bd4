"""``python -m relaypoint`` runs the CLI."""

from .cli import main

main()
