"""Security for ADS: credentials, tokens, client security settings and the ACL authorizer (pure modules)."""
