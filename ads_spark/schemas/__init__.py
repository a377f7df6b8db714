"""Typed topics' schemas (issue #26), pure: which Arrow types a topic may declare and their stored form
(``types``), a Spark DDL subset parsed without a JVM (``ddl``), the schema registries' compatibility
modes (``compatibility``), and how a batch written under one version is read under another
(``compatibility.resolve``). No I/O: the registry in ZooKeeper and the brokers' checks build on these."""
