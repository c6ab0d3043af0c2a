"""Files from outside, read without trusting them, and files of ours, written whole.

The floor under every room: opening what a user, a project or a repository
supplies (size caps, no FIFOs, no aliases in YAML), rewriting a file so that
readers never see half of it, and ext4's top-directory flag.
It imports nothing of subvisor.
"""
