"""Which AWS instance types offer GPUDirect RDMA over EFA (the Elastic Fabric Adapter).

On EFA, NCCL's network is the aws-ofi-nccl plugin (``NET/AWS Libfabric``, ``NET/Libfabric``),
and whether it moves GPU memory directly (``/GDRDMA``) is decided by the instance type, not by a
driver module the user could load. The table is aws-ofi-nccl's own, src/platform-aws.cpp
``platform_data_map`` (aws/aws-ofi-nccl, read at commit 01666ec), field ``gdr_required``:
true for p4d.24xlarge, p4de.24xlarge, p5 / p5e (but p5.4xlarge), p5en.48xlarge and the p6 and
later p-series; false for p3dn.24xlarge, p5.4xlarge and g5.48xlarge. AWS's EFA guide (docs.aws.
amazon.com AWSEC2 UserGuide efa.html, "Supported instance types") says the same in its RDMA
read/write columns: RDMA read only on Nitro v4 and later instances. An instance type not in the
table is not judged: whether it offers GPUDirect RDMA is said as not known.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

#: (pattern on the instance type, offers GPUDirect RDMA over EFA); the first match wins, as in
#: aws-ofi-nccl's platform_data_map.
EFA_GDR: Tuple[Tuple[str, bool], ...] = (
    (r"^p4d\.24xlarge$", True),
    (r"^p4de\.24xlarge$", True),
    (r"^p3dn\.24xlarge$", False),
    (r"^p5en\.48xlarge$|^p([6-9]|[0-9]{2,})", True),
    (r"^p5\.4xlarge$", False),
    (r"^p5e?\.", True),
    (r"^g5\.48xlarge$", False),
)
#: Where the table comes from, for the findings that use it.
SOURCE = "aws-ofi-nccl's platform table (src/platform-aws.cpp, gdr_required)"


def instance_type(text: Optional[str]) -> Optional[str]:
    """An EC2 instance type as the plugin prints it (``p4d.24xlarge``; SageMaker's ``ml.`` prefix
    dropped); None for a platform name that is no instance type (aws-ofi-nccl 1.1's "P4d")."""
    t = str(text or "").strip().rstrip(",").lower()
    t = t[3:] if t.startswith("ml.") else t
    return t if re.fullmatch(r"[a-z][a-z0-9-]*\.[a-z0-9-]+", t) else None


def offers_gdr(itype: Optional[str]) -> Optional[bool]:
    """Whether the instance type offers GPUDirect RDMA over EFA per the table; None where not in it."""
    t = instance_type(itype)
    if t is None:
        return None
    for pattern, gdr in EFA_GDR:
        if re.search(pattern, t):
            return gdr
    return None
