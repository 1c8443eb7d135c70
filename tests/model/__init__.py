"""The model (issue 17, part 3): a hypothesis state machine against the real Core."""
