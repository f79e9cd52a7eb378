"""``python -m tests.chaos --faults 100 --seed S``: the seeded chaos run (see run.py).

Needs the etcd binary (tests/run.sh installs it).  Prints faults injected and survived,
keys checked, keys lost, phantom keys, max RSS and the canary update rate during attacks vs
before; exits non-zero unless every fault was survived with nothing lost.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tests.chaos.run import main

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--datastore", choices=("both", "etcd", "kdd"), default="both",
                   help="both: half the faults against each")
    p.add_argument("--agents", type=int, default=3, help="agents per protocol")
    p.add_argument("--json", action="store_true")
    p.add_argument("--log-level", default="ERROR")
    args = p.parse_args()
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The test bed API server logs every connection the proxy cuts under it.
    logging.getLogger("testbed.apiserver").setLevel(logging.CRITICAL)
    sys.exit(main(args.faults, args.seed, datastore=args.datastore, agents=args.agents, as_json=args.json))
