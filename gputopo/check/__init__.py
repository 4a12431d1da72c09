"""`gputopo check`: judge a run folder against an acceptance spec (TOML) for CI.

Entry points (heavy modules load lazily; import these from their modules):
  gputopo.check.spec.load_spec(path) -> Spec                 InputFileError (exit 2) naming the key
  gputopo.check.verdict.run_check(spec_path, run_dir) -> Verdict   .exit_code 0 pass / 1 fail
  gputopo.check.junit.write_junit(verdict, path)
  gputopo.check.init_spec.write_init_spec(run_dir, out_path, margin=0.2)
Shipped example specs: gputopo/check/specs/*.toml (spec.shipped_spec_path(name)).
"""
