"""The service around the operator: kernel bench, regression gate, report, environment manifest, GPU matrix
runner and launch-table tuner. It imports the operator (dyt); the operator never imports it."""
