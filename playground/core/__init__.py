"""Framework basics every layer uses: errors, sizes, the environment, Ctrl-C, the C module, facts about the machine, where ranks sit, run and scratch directories."""
