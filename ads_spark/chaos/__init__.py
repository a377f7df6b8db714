"""Fault injection in the style of Jepsen: workload, nemeses, the queue checker and the report."""
