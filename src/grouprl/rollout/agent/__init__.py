"""An agent the user wrote, served through an OpenAI-compatible endpoint: the third source of episodes."""
