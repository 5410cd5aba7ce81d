"""alphagym.data"""
