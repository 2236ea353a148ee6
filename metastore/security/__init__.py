"""Who is calling and what they may do: principals, tokens, roles and grants."""
