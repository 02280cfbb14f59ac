"""The `retrain` commands, one module per family of what users do: `run` (start, status, runs), `data`
(upload, pretrained upload), `serve` (predict, ui), `local` (local up, down), `report`, `preflight` and
`demo`. Each command parses its options, calls the plain functions of its family's package and prints;
what they share (the error boundary, the common options, the console, the stack they talk to) is in
`_shared`. `retrain.cli` assembles them into the Typer app."""
