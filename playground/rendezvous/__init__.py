"""How ranks find each other: the coordinator, the control messages, a rank's side of joining."""
