"""tools/bench_live.py: its parsers and figures, on lines captured from real runs of the live pipeline
(gst-launch-1.0 1.22 -m -v, GST_TRACERS=latency, GST_DEBUG=GST_TRACER:7), stamped as the tool stamps
them. No GStreamer needed, except to decode the clip the clip source replays."""

from __future__ import annotations

import os
from argparse import Namespace
from pathlib import Path

import pytest

from tools.bench_live import (clip_frames, first_error, measure, parse_fps_report, parse_latency_trace, parse_qos,
                              pipeline_description, stamped_lines, targets)

STATS_SEGMENTER = (
    '[    0.099] Got message #62 from element "matanyone0" (element): matanyone-stats, frame=(guint64)1, '
    'pts=(guint64)21862676, engine=(string)segmenter, precision=(string)fp32, preprocess-ms=(double)0.42231599986553192, '
    'inference-ms=(double)11.875653000082821, postprocess-ms=(double)2.9686730001121759, total-ms=(double)15.269305999856442, '
    'memory-ms=(double)0, latency-ms=(double)15.269305999856442, frames-dropped=(guint64)0, seeded=(boolean)true, '
    'memory-frames=(uint)0, segmenter-ms=(double)11.875653000082821;')
# gst-launch prints "Got message … (element): " and the structure in two writes; a tracer line on
# stderr can land between them, leaving the structure at the start of its own line.
STATS_SPLIT = (
    '[    5.610] Got message #197 from element "matanyone0" (element): 0:00:05.609537921 11036 0x55cc6d614ea0 TRACE'
    '             GST_TRACER :0:: latency, src-element-id=(string)0x55cc6d5d1690, src-element=(string)videotestsrc0, '
    'src=(string)src, sink-element-id=(string)0x55cc6d60a210, sink-element=(string)fps, sink=(string)sink, '
    'time=(guint64)4073887485, ts=(guint64)5609522989;\n'
    '[    5.610] matanyone-stats, frame=(guint64)1, pts=(guint64)888035269, engine=(string)matanyone2, precision=(string)fp32, '
    'preprocess-ms=(double)20.788102000020444, inference-ms=(double)4049.7955030000303, postprocess-ms=(double)3.1469270000234246, '
    'total-ms=(double)4073.7330159998965, memory-ms=(double)0, latency-ms=(double)23.938213999848813, frames-dropped=(guint64)0, '
    'seeded=(boolean)true, memory-frames=(uint)1, seed-ms=(double)4049.7948020000476, encoder-ms=(double)105.67318799998611, '
    'uncert-ms=(double)0, readout-ms=(double)646.04695999994874, decoder-ms=(double)2160.851650999859, '
    'maskencoder-ms=(double)788.83091800054535, memframe-ms=(double)344.74921599938534, segmenter-ms=(double)0;')
FPS_AVERAGE = ('[    1.653] /GstPipeline:pipeline0/GstFPSDisplaySink:fps: last-message = rendered: 47, dropped: 0, '
               'current: 29.99, average: 30.25')
FPS_DROPPING = ('[    7.206] /GstPipeline:pipeline0/GstFPSDisplaySink:fps: last-message = rendered: 1, dropped: 2, '
                'fps: 0.83, drop rate: 1.66')
FPS_MESSAGE_COPY = ('[    7.206] Got message #459 from element "fps" (property-notify): GstMessagePropertyNotify, '
                    'property-name=(string)last-message, property-value=(string)"rendered:\\ 1\\,\\ dropped:\\ 2\\,\\ '
                    'fps:\\ 0.83\\,\\ drop\\ rate:\\ 1.66";')
TRACE_LIVE = ('[    0.099] 0:00:00.100053704 12320 0x55e38f0bacc0 TRACE             GST_TRACER :0:: latency, '
              'src-element-id=(string)0x55e38f0783d0, src-element=(string)livesrc, src=(string)src, '
              'sink-element-id=(string)0x55e38f0b0210, sink-element=(string)fps, sink=(string)sink, '
              'time=(guint64)15424216, ts=(guint64)100035106;')
# The element decodes seed-mask with a pipeline of its own; the tracer sees that one too.
TRACE_MASK = ('[    0.035] 0:00:00.033136967 12330 0x5563386ccea0 TRACE             GST_TRACER :0:: latency, '
              'src-element-id=(string)0x5563386d0350, src-element=(string)filesrc0, src=(string)src, '
              'sink-element-id=(string)0x5563386e8700, sink-element=(string)sink, sink=(string)sink, '
              'time=(guint64)2160674, ts=(guint64)33128724;')
TRACE_FORMAT = ('[    0.022] 0:00:00.020920168 11036 0x55cc6d422830 DEBUG             GST_TRACER '
                'gsttracerrecord.c:123:gst_tracer_record_build_format: new format string: latency, '
                'src-element-id=(string)%s, src-element=(string)%s, src=(string)%s, sink-element-id=(string)%s, '
                'sink-element=(string)%s, sink=(string)%s, time=(guint64)%lu, ts=(guint64)%lu;')
QOS_SINK = ('[    6.001] Got message #209 from element "livesink" (qos): GstMessageQOS, live=(boolean)true, '
            'running-time=(guint64)1126316045, stream-time=(guint64)1126316045, timestamp=(guint64)1126316045, '
            'duration=(guint64)33333333, jitter=(gint64)3637073225, proportion=(double)-1, quality=(int)1000000, '
            'format=(GstFormat)buffers, processed=(guint64)0, dropped=(guint64)1;')
NO_PROPERTY = '[    0.020] WARNING: erroneous pipeline: no property "mode" in element "matanyone"'


def test_stamped_lines_strip_stamp_and_colour():
    text = '[   12.500] \x1b[36m 4415\x1b[00m x\nplain line'
    assert stamped_lines(text) == [(12.5, ' 4415 x'), (None, 'plain line')]


def test_fps_reports_both_formats_and_not_the_message_copy():
    assert parse_fps_report(FPS_AVERAGE) == (47, 0)
    assert parse_fps_report(FPS_DROPPING) == (1, 2)
    assert parse_fps_report(FPS_MESSAGE_COPY) is None


def test_latency_traces():
    assert parse_latency_trace(TRACE_LIVE) == ('livesrc', 'fps', pytest.approx(15.424216), pytest.approx(0.100035106))
    assert parse_latency_trace(TRACE_MASK)[:2] == ('filesrc0', 'sink')
    assert parse_latency_trace(TRACE_FORMAT) is None
    # A trace that landed inside a "Got message" line is still read.
    assert parse_latency_trace(STATS_SPLIT.splitlines()[0])[1:3] == ('fps', pytest.approx(4073.887485))


def test_qos_and_errors():
    assert parse_qos(QOS_SINK) == ('livesink', pytest.approx(3637.073225), 0, 1)
    assert first_error('\n'.join([TRACE_LIVE, NO_PROPERTY])) == NO_PROPERTY.split('] ', 1)[1]
    assert first_error(STATS_SEGMENTER) is None


def live_log(seconds: float, fps: float, stats_extra: str = '', sink_drop_every: int = 0) -> str:
    """A stamped log of a run at `fps`, built from the captured lines: one trace and one stats message
    per frame, fpsdisplaysink reports every 0.5 s, a QoS message per frame the sink drops."""
    lines, rendered, dropped, next_report = [TRACE_FORMAT, TRACE_MASK], 0, 0, 0.5
    stats_body = STATS_SEGMENTER.split('(element): ', 1)[1].rstrip(';')
    for index in range(int(seconds * fps)):
        t = 1.0 + index / fps
        stamp = f'[{t:9.3f}] '
        ms = 5 + index % 10  # source-to-sink 5–14 ms
        trace = TRACE_LIVE.split('] ', 1)[1]
        lines.append(stamp + trace.replace('time=(guint64)15424216', f'time=(guint64){ms * 1000000}'))
        row = stats_body.replace('frame=(guint64)1,', f'frame=(guint64){index + 1},')
        lines.append(stamp + f'Got message #{index} from element "matanyone0" (element): {row}{stats_extra};')
        if sink_drop_every and index % sink_drop_every == sink_drop_every - 1:
            dropped += 1
            qos = QOS_SINK.split('] ', 1)[1]
            lines.append(stamp + qos.replace('processed=(guint64)0, dropped=(guint64)1',
                                             f'processed=(guint64){rendered}, dropped=(guint64){dropped}'))
        else:
            rendered += 1
        if t - 1.0 >= next_report:
            next_report += 0.5
            lines.append(stamp + f'/GstPipeline:pipeline0/GstFPSDisplaySink:fps: last-message = rendered: {rendered}, '
                         f'dropped: {dropped}, current: 30.00, average: 30.00')
    return '\n'.join(lines)


def test_measure_sync_run():
    figures = measure(live_log(15, 30))
    assert figures['fps_out'] == pytest.approx(30, rel=0.02)
    assert figures['element_frames_processed'] == 450
    assert figures['element_frames_dropped'] == 0
    assert figures['sink_frames_dropped'] == 0 and figures['sink_frames_rendered'] == 450
    assert figures['frames_at_sink_traced'] == 450  # the mask pipeline's trace is not counted
    assert figures['stats_in_window'] == pytest.approx(300, abs=2)  # the first 5 s left out
    assert figures['inference_ms_median'] == pytest.approx(11.875653)
    assert figures['latency_ms']['median'] == pytest.approx(9.5, abs=0.6)
    assert figures['alpha_age_ms'] == {'median': None, 'p95': None}
    assert figures['inference_fps_median'] is None
    assert targets('sync', figures)['met'] is True


def test_measure_counts_sink_drops_against_processed():
    figures = measure(live_log(10, 30, sink_drop_every=10))
    assert figures['sink_frames_dropped'] == 30
    assert figures['sink_dropped_percent_of_processed'] == pytest.approx(10.0)
    assert figures['sink_frames_rendered'] == 270
    assert figures['fps_out'] == pytest.approx(27, rel=0.03)
    assert figures['sink_drop_lateness_ms']['median'] == pytest.approx(3637.073225)
    assert targets('sync', figures)['met'] is False


def test_async_targets_from_alpha_age():
    figures = measure(live_log(10, 30, stats_extra=', alpha-age-ms=(double)20.5, inference-fps=(double)28.9'))
    assert figures['alpha_age_ms'] == {'median': 20.5, 'p95': 20.5}
    assert figures['inference_fps_median'] == 28.9
    verdict = targets('async', figures)
    assert {name: check['met'] for name, check in verdict['checks'].items()} == {
        'fps out': True, 'element drops': True, 'alpha-age p95, ms': True}
    assert verdict['checks']['alpha-age p95, ms']['limit'] == pytest.approx(2.5 * 11.875653)
    assert verdict['met'] is True
    # Without the alpha-age field (a plugin without async mode) the verdict is unknown, not a pass.
    assert targets('async', measure(live_log(10, 30)))['met'] is None


def test_async_alpha_age_bound_is_at_least_one_frame():
    # A fast engine (12 ms inferences) whose frames wear the alpha of the frame before: 33.3 ms old at
    # 30 fps, over 2.5 × 12 ms but within one frame interval; two frames old is over both.
    one_frame = 1000 / 30
    for age, met in ((one_frame, True), (2 * one_frame, False)):
        figures = measure(live_log(10, 30, stats_extra=f', alpha-age-ms=(double){age}, inference-fps=(double)28.9'))
        assert targets('async', figures)['checks']['alpha-age p95, ms']['met'] is False
        check = targets('async', figures, frame_ms=one_frame)['checks']['alpha-age p95, ms']
        assert check['limit'] == pytest.approx(one_frame) and check['met'] is met


def test_seeds_first_frame_and_pts_lag():
    # PLAYING at 0.8 s; frame i's stats at 1.0 + i/30 s with its pts rewritten to i/30 s behind
    # PLAYING by 0.2 s (the log's frames reach the sink 0.2 s after their running time).
    stats_body = STATS_SEGMENTER.split('(element): ', 1)[1].rstrip(';')
    lines = ['[    0.800] Setting pipeline to PLAYING ...']
    for index in range(300):
        t = 1.0 + index / 30
        row = stats_body.replace('frame=(guint64)1,', f'frame=(guint64){index + 1},')
        row = row.replace('pts=(guint64)21862676', f'pts=(guint64){round(index / 30 * 1e9)}')
        if index in (0, 150):
            row += ', seed-ms=(double)1000'
        lines.append(f'[{t:9.3f}] ' + TRACE_LIVE.split('] ', 1)[1])
        lines.append(f'[{t:9.3f}] Got message #{index} from element "matanyone0" (element): {row};')
    figures = measure('\n'.join(lines))
    assert figures['seeds'] == 2
    assert figures['first_frame_after_launch_s'] == pytest.approx(1.0)
    assert figures['first_frame_after_playing_s'] == pytest.approx(0.2)
    assert figures['pts_lag_ms']['median'] == pytest.approx(200, abs=2)
    assert figures['pts_lag_ms']['p95'] == pytest.approx(200, abs=2)
    # Async mode: frames wearing the seeded alpha all carry its seed-ms; it is one seed.
    worn = [f'[    2.000] Got message #{i} from element "matanyone0" (element): '
            + stats_body.replace('pts=(guint64)21862676', f'pts=(guint64){(40 + i) * 33_000_000}')
            + f', seed-ms=(double)1000, alpha-age-ms=(double){i * 33};' for i in range(5)]
    assert measure('\n'.join(worn))['seeds'] == 1


def test_empty_log_has_no_figures():
    figures = measure(NO_PROPERTY)
    assert figures['fps_out'] is None and figures['latency_ms'] == {'median': None, 'p95': None}
    assert targets('sync', figures)['met'] is None


@pytest.mark.parametrize('mode, delay, present', [('sync', 0, False), ('sync', 40, True), ('async', 0, True)])
def test_mode_properties_only_when_asked_for(mode, delay, present):
    args = Namespace(input_size=(1280, 720), working_size=(512, 288), async_delay=delay, model_dir=None,
                     fps=30, duration=15)
    description = pipeline_description(args, 'segmenter', mode, None)
    assert ('mode=' in description) is present and ('async-delay=' in description) is present
    assert 'num-buffers=450' in description and 'working-size=288' in description
    assert 'seed=' not in description
    assert 'seed=mask seed-mask=/m.png' in pipeline_description(args, 'matanyone2', mode, '/m.png')
    assert 'model-placement' not in pipeline_description(args, 'matanyone2', mode, '/m.png')
    # --placement reaches MatAnyone2 runs only (the segmenter refuses it).
    args.placement = 'encoder=bf16,memframe=bf16'
    assert ' model-placement=encoder=bf16,memframe=bf16' in pipeline_description(args, 'matanyone2', mode, '/m.png')
    assert 'model-placement' not in pipeline_description(args, 'segmenter', mode, None)


def test_clip_source_and_outputs_in_description():
    args = Namespace(input_size=(1920, 1080), working_size=(512, 288), async_delay=0, model_dir=None,
                     fps=60, duration=20, source='clip', clip_folder=Path('/frames'), clip_count=96)
    gray = pipeline_description(args, 'segmenter', 'sync', None, output='gray')
    assert gray.startswith('multifilesrc name=livesrc location=/frames/f%03d index=0 stop-index=95 loop=true '
                           'num-buffers=1200 ! rawvideoparse width=1920 height=1080 format=bgra framerate=60/1 ! matanyone ')
    assert '! video/x-raw,format=GRAY8 ! fpsdisplaysink' in gray and 'background=' not in gray
    color = pipeline_description(args, 'segmenter', 'sync', None, output='color')
    assert 'background=color edge-colors=estimated' in color and '! video/x-raw,format=BGRA ! fpsdisplaysink' in color
    assert 'background=none edge-colors=estimated' in pipeline_description(args, 'segmenter', 'sync', None, output='none')
    args.source = 'ball'
    assert pipeline_description(args, 'segmenter', 'sync', None).startswith('videotestsrc name=livesrc is-live=true')


@pytest.mark.parametrize('p95, met', [(11.5, True), (12.0, True), (12.5, False), (None, None)])
def test_element_time_target(p95, met):
    figures = measure(NO_PROPERTY)
    figures['sink_dropped_percent_of_processed'] = 0.0
    figures['total_ms'] = {'median': None if p95 is None else p95 - 1, 'p95': p95}
    result = targets('sync', figures, element_p95_ms=12)
    assert result['checks']['element total p95, ms']['met'] is met
    assert result['met'] is met
    assert 'element total p95, ms' not in targets('sync', figures)['checks']


def test_clip_frames_are_decoded_once(tmp_path):
    clip = Path(os.environ.get('MATANYONE_SHARED', Path(__file__).resolve().parents[3] / 'shared')) / 'media' / 'test-sample2.mp4'
    folder, count = clip_frames(clip, (64, 36), tmp_path)
    frames = sorted(folder.glob('f[0-9][0-9][0-9]'))
    assert count == len(frames) and 90 <= count <= 96  # the clip has 95 frames
    assert all(frame.stat().st_size == 64 * 36 * 4 for frame in frames)
    assert not (folder / 'all.bgra').exists()
    stamp = frames[0].stat().st_mtime_ns
    assert clip_frames(clip, (64, 36), tmp_path) == (folder, count)
    assert frames[0].stat().st_mtime_ns == stamp  # not decoded again
