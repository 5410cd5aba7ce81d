"""alphagym.probe"""
