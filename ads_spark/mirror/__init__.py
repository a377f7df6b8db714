"""Cross-cluster mirroring, MirrorMaker 2 style (``jobs/mirror.py``).

``naming`` (remote topic names, loop prevention), ``checkpoints`` (offset checkpoints and their
translation, pure), ``topics`` (remote topics and configs kept in sync; reading checkpoints;
``translate_starting_offsets``), ``job`` (the Spark streaming query), ``verify`` (source vs
target, record for record).
"""
