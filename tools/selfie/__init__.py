"""MediaPipe selfie segmentation -> ONNX converter and its validation (see convert.py)."""
