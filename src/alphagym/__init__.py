"""alphagym: teach a language model to write formulaic alphas, and prove on a holdout year that it did."""

__version__ = "0.1.0"
