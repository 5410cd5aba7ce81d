"""alphagym.report"""
