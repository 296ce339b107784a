"""What a person sees: result tables, progress bars, and native code's stderr kept off the terminal."""
