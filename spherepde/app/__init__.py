"""The main job: scenario configuration, the run itself, the command line and its figures."""
