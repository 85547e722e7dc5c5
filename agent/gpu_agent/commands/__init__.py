"""One module per `gpu-agent` subcommand."""
