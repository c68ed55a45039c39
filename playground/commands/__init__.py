"""What the subcommands do: bench, bench table, bench copy, inspect, results, hotpath."""
