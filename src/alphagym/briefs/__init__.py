"""alphagym.briefs"""
