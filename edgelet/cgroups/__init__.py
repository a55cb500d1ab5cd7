"""cgroups"""
