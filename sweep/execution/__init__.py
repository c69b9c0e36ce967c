"""Points to rows: what a worker runs, where it runs (in process, a local pool or Ray), and the
driver that plans missing work, streams it out and writes parts."""
