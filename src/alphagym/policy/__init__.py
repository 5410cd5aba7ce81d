"""alphagym.policy"""
