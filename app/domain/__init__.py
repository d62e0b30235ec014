"""Pure logic with no I/O: policy, identity, retry rules, advice decisions, signatures."""
