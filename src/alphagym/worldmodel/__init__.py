"""alphagym.worldmodel"""
