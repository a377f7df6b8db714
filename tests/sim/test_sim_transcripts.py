"""Scenario transcripts (etcd raft's datadriven style) over the simulated cluster.

Each file in tests/sim/testdata/ holds cases separated by blank lines: commands,
then ``----``, then the expected output. Regenerate after an intended change:
    ADS_REWRITE=1 pytest tests/sim -k transcripts
Commands: ``cluster min_isr=N [unclean]``, ``produce ms=N [n=K] [acks=all|1]``,
``run ms=N``, ``crash B|leader``, ``restart B``, ``isolate-brokers B|leader``,
``isolate-zk B|leader``, ``heal``, ``state``.
"""

import os
import pathlib

import pytest

from tests.sim import scenarios as S

DATA = pathlib.Path(__file__).parent / "testdata"


def _target(c, arg):
    return S.leader_id(c) if arg == "leader" else int(arg)


def _state(c) -> list[str]:
    z = c.zk.partitions[0]
    out = [f"zk leader={z.leader} epoch={z.leader_epoch} isr={list(z.isr)} elr={list(z.elr)}"]
    for b in c.brokers.values():
        s = b.states[0]
        role = s.role.value if b.alive else "down"
        out.append(f"  b{b.id} {role} epoch={s.leader_epoch} leo={s.log_end_offset} hw={s.high_watermark}")
    out.append(f"  acked_all={c.checker.acked_all} violations={len(c.checker.violations)}")
    return out


def run_case(commands: list[str]) -> list[str]:
    c, out = None, []
    for line in commands:
        word, *args = line.split()
        kv = dict(a.split("=") for a in args if "=" in a)
        if word == "cluster":
            c, _ = S.make(min_isr=int(kv.get("min_isr", 2)), unclean="unclean" in args)
        elif word == "produce":
            S.run(c, int(kv["ms"]), produce=int(kv.get("n", 1)), acks=-1 if kv.get("acks", "all") == "all" else 1)
        elif word == "run":
            S.run(c, int(kv["ms"]))
        elif word == "crash":
            c.crash(_target(c, args[0]))
        elif word == "restart":
            c.restart(int(args[0]))
        elif word == "isolate-brokers":
            c.isolate_from_brokers(_target(c, args[0]))
        elif word == "isolate-zk":
            c.isolate_from_zk(_target(c, args[0]))
        elif word == "heal":
            c.heal()
        elif word == "state":
            out.extend(_state(c))
        else:
            raise ValueError(f"unknown command {line!r}")
    out.extend(c.checker.violations[:1])
    out.extend(c.checker.unclean_reasons[:1])
    return out


def _cases(text: str):
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        sep = lines.index("----") if "----" in lines else len(lines)
        cmds = [l for l in lines[:sep] if l.strip() and not l.startswith("#")]
        yield lines[:sep], cmds, lines[sep + 1:]


@pytest.mark.parametrize("path", sorted(DATA.glob("*.txt")), ids=lambda p: p.stem)
def test_transcripts(path):
    rewrite = os.environ.get("ADS_REWRITE") == "1"
    blocks, failures = [], []
    for head, cmds, expected in _cases(path.read_text()):
        got = run_case(cmds)
        blocks.append("\n".join(head + ["----"] + got))
        if got != expected:
            failures.append("\n".join(head + ["---- expected"] + expected + ["---- got"] + got))
    if rewrite:
        path.write_text("\n\n".join(blocks) + "\n")
    elif failures:
        pytest.fail("\n\n".join(failures) + "\n(ADS_REWRITE=1 to accept)", pytrace=False)
