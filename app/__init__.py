"""The Gradio app (Polestar Studio); built by `create_app()` in the app issue."""
