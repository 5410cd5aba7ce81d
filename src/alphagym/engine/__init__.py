"""alphagym.engine"""
