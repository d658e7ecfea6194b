"""`python -m windvane`: the same as the `windvane` command."""

from windvane import main

main()
