"""action_heads"""
