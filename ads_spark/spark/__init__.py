"""Spark integration of ADS: the source (``source/``) and sink (``sink/``) of ``format("ads")``, and what they share.

Kept import-free: Spark discovers the format through ``pyspark_ads``; nothing heavy may load on that path.
"""
