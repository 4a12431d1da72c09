"""Many nodes: `gputopo cluster` inside torchrun / srun ranks, or on a simulated cluster.

Modules, one job each:

- ``launch``: the rank's place in the job from torchrun's or Slurm's variables;
- ``patterns``: which nodes meet in which round (random2pass, pairwise, all) and ``--plan``;
- ``rounds``: the round loop over a backend, the same for a real and a simulated cluster (its
  records are gputopo.model.cluster's);
- ``fingerprint``: per-node software/topology facts;
- ``sim_backend``: a simulated cluster (one process, modeled time);
- ``dist_backend``: the real one (torch.distributed, NCCL or gloo for data, gloo for control);
- ``job``: one cluster job: the rounds, the findings (judged by gputopo.report.cluster_findings:
  slow node or slow link, lost ranks, nodes that differ from the majority), the end of its run
  folder (cluster.json, report, drain.txt); gputopo.runfolder.cluster writes the folder's files.
"""
