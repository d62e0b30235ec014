"""What people read: the story of an attempt and the glossary of Recovery's words."""
