"""alphagym.policy"""

# the file that marks a saved policy or RL checkpoint folder: here, so that checking a folder imports no
# model library (`propose.front`)
META = "alphagym_policy.json"
