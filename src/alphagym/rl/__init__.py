"""alphagym.rl"""
