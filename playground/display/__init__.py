"""Tables and plots for the terminal, files and notebooks."""
