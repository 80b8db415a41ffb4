/// What the per-frame pixel kernels offer. The kernels (Sources/PixelKernels) are compiled once per
/// instruction set, each copy a module of its own; MattePixels picks one at run time and calls it
/// through these protocols, so its users see one `Compositor` and one `Resampler` whatever the CPU.

/// Pixel order of the composite output.
public enum CompositeFormat: Sendable {
    case bgra, rgba
}

/// What the composite lies over: nothing (the matte becomes the alpha channel), a colour, or a
/// blurred copy of the frame.
public enum BackgroundMode: String, CaseIterable, Sendable {
    case none, color, blur
}

/// A frame and its alpha → the composite output (see MattePixels.Compositor).
public protocol Compositing {
    init()
    mutating func composite(frame: BGRAImage, alpha: GrayView, output: UnsafeMutablePointer<UInt8>,
                            outputStride: Int, format: CompositeFormat, background: BackgroundMode,
                            color: UInt32, foregroundEstimation: Bool, premultiplied: Bool)
}

/// Resampling between two fixed sizes (see MattePixels.Resampler).
public protocol Resampling: AnyObject {
    init(sourceWidth: Int, sourceHeight: Int, targetWidth: Int, targetHeight: Int)
    func bgraToRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>,
                   pixelStep: Int, rowStride: Int, planeStride: Int, scale: Float)
    func resample(_ source: UnsafePointer<Float>, sourceStride: Int,
                  into destination: UnsafeMutablePointer<Float>, destinationStride: Int)
    func resample(_ source: UnsafePointer<Float>, sourceStride: Int, into destination: GrayImage)
    func resample(_ source: GrayView, into destination: UnsafeMutablePointer<Float>, destinationStride: Int)
}
