"""The results store (atomic, checksummed records keyed by what determines them) and the
verdicts that judge a measured number against its claim."""
