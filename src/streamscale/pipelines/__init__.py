"""The seed pipelines (purchase enrichment, game sessions) and their pure record codecs."""
