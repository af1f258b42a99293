#!/usr/bin/python3
"""test_html_chromium: gradprof's HTML reports in headless Chromium.

  html_screenshot.py GRADPROF TRACES_DIR OUT_DIR

Writes the HTML report of mlp_grad.gptrace and the HTML diff of mlp_grad vs mlp_nograd into
OUT_DIR, then, for each page, in `chromium --headless`:
  - takes a 1280x2000 screenshot (OUT_DIR/report.png, OUT_DIR/diff.png) with console logging on,
    and fails on any console message (an uncaught exception, console.error, a blocked resource);
  - dumps the DOM after the page's script ran and fails unless the script marked the page ready
    (<body data-ready="1">, set as its last statement);
  - decodes the PNG (zlib from the standard library) and fails unless it shows the chart: enough
    pixels in the colours of the parameter and saved areas as drawn (category colour at 88%
    opacity over the plot background) and of the peak line, and a non-uniform image;
  - loads a copy of the page with a probe script appended that hovers the chart and clicks a
    table header twice through the page's own handlers, and fails unless the tooltip showed the
    totals and the table sorted descending, then ascending.
Exit status 0 on success, 1 on failure, 77 (ctest's SKIP_RETURN_CODE) when /usr/bin/chromium is
not installed: a missing browser is reported as skipped, never as passed.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 2000


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, timeout=120):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail("timed out: " + " ".join(cmd))
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def read_png(path):
    """Returns (width, height, rows) with rows a list of bytes objects of RGB(A) pixels."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    if ihdr is None:
        fail("%s has no IHDR" % path)
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace != 0:
        fail("%s: unsupported PNG (depth %d, colour type %d, interlace %d)"
             % (path, depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif ft == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def blend(hex_colour, alpha, bg=(0xfb, 0xfc, 0xfd)):
    c = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return tuple(round(alpha * c[k] + (1 - alpha) * bg[k]) for k in range(3))


def count_near(w, h, bpp, rows, colour, tol=10):
    n = 0
    for row in rows:
        for x in range(0, w * bpp, bpp):
            if abs(row[x] - colour[0]) <= tol and abs(row[x + 1] - colour[1]) <= tol and \
                    abs(row[x + 2] - colour[2]) <= tol:
                n += 1
    return n


def check_page(name, html, out_dir, scratch):
    url = "file://" + os.path.abspath(html)
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
            "--user-data-dir=" + os.path.join(scratch, name + "-profile")]
    png = os.path.join(out_dir, name + ".png")
    if os.path.exists(png):
        os.unlink(png)
    rc, out, err = run(base + ["--screenshot=" + png, "--window-size=%d,%d" % (WIDTH, HEIGHT),
                               "--enable-logging=stderr", "--v=0", url])
    if rc != 0:
        fail("%s: chromium exited with %d:\n%s" % (name, rc, err[-3000:]))
    console = [l for l in err.splitlines() if ":CONSOLE" in l or "Uncaught" in l]
    if console:
        fail("%s: console messages:\n%s" % (name, "\n".join(console)))
    if not os.path.exists(png) or os.path.getsize(png) < 20000:
        fail("%s: no screenshot, or a suspiciously small one, at %s" % (name, png))

    rc, dom, err = run(base + ["--dump-dom", url])
    if rc != 0:
        fail("%s: chromium --dump-dom exited with %d:\n%s" % (name, rc, err[-3000:]))
    if not re.search(r'<body[^>]*\bdata-ready="1"', dom):
        fail("%s: the page's script did not finish (no <body data-ready=\"1\"> in the DOM)" % name)
    if dom.count("<svg") < 1:
        fail("%s: no <svg> in the rendered DOM" % name)

    w, h, bpp, rows = read_png(png)
    if (w, h) != (WIDTH, HEIGHT):
        fail("%s: screenshot is %dx%d, expected %dx%d" % (name, w, h, WIDTH, HEIGHT))
    colours = set()
    for row in rows[::25]:
        for x in range(0, w * bpp, bpp * 25):
            colours.add(row[x:x + 3])
    if len(colours) < 20:
        fail("%s: the screenshot is nearly uniform (%d colours sampled)" % (name, len(colours)))
    # The chart's box: where the parameter area (the bottom of the stack) is drawn, widened by
    # the space above the plot where the peak label goes. Colours are counted inside it only, so
    # the red of the cards and findings does not count as the peak line.
    param = blend("#4e79a7", 0.88)
    ys = [y for y, row in enumerate(rows) if count_near(w, 1, bpp, [row], param) >= 200]
    if not ys:
        fail("%s: no row of the parameter area: the chart is not drawn" % name)
    end = 0
    while end + 1 < len(ys) and ys[end + 1] - ys[end] <= 5:  # the first chart's rows
        end += 1
    box = rows[max(0, ys[0] - 60):ys[end] + 1]
    want = {"parameter area": (param, 20000),
            "saved area": (blend("#e15759", 0.88), 300),
            "peak line": ((0xb0, 0x00, 0x20), 150)}
    for what, (colour, minimum) in want.items():
        n = count_near(w, len(box), bpp, box, colour)
        print("%s: %d pixels of the %s (colour %s)" % (name, n, what, colour))
        if n < minimum:
            fail("%s: only %d pixels of the %s, expected at least %d: is the chart drawn?"
                 % (name, n, what, minimum))
    check_interaction(name, html, base, scratch)
    print("%s: ok, screenshot %s" % (name, png))


# Appended to a copy of the page: hovers the first chart and sorts the first sortable table with
# numbers in its second column
# through the page's own handlers, and records what happened on <body> for --dump-dom.
PROBE = """<script>(function(){
var out=[];
try{
 var svg=document.querySelector('svg.chart'),hit=svg.querySelector('.hit'),
   r=hit.getBoundingClientRect();
 hit.dispatchEvent(new MouseEvent('mousemove',{clientX:r.left+r.width*0.5,clientY:r.top+r.height/2,
   bubbles:true}));
 var tip=document.querySelector('.tip');
 out.push('tip='+tip.style.display+':'+(tip.textContent.indexOf('total')>=0?'total':'none'));
 var t=Array.prototype.filter.call(document.querySelectorAll('table.sortable'),function(x){
   return x.tBodies[0].rows.length>1&&x.tBodies[0].rows[0].cells[1].hasAttribute('data-v');})[0];
 var th=t.tHead.rows[0].cells[1],rows;
 function order(){rows=t.tBodies[0].rows;
   var a=parseFloat(rows[0].cells[1].getAttribute('data-v')),
   b=parseFloat(rows[rows.length-1].cells[1].getAttribute('data-v'));
   return a>b?'desc':a<b?'asc':'same';}
 th.click();out.push('sort1='+order());th.click();out.push('sort2='+order());
}catch(e){out.push('error='+e);}
document.body.setAttribute('data-probe',out.join(' '));
})();</script>
"""


def check_interaction(name, html, base, scratch):
    with open(html, encoding="utf-8") as f:
        text = f.read()
    probe = os.path.join(scratch, name + "-probe.html")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(text.replace("</body>", PROBE + "</body>"))
    rc, dom, err = run(base + ["--window-size=%d,%d" % (WIDTH, HEIGHT), "--dump-dom",
                               "file://" + probe])
    m = re.search(r'data-probe="([^"]*)"', dom)
    if rc != 0 or not m:
        fail("%s: the interaction probe did not run (rc %d)" % (name, rc))
    got = m.group(1)
    print("%s: interaction probe: %s" % (name, got))
    for want in ("tip=block:total", "sort1=desc", "sort2=asc"):
        if want not in got.split():
            fail("%s: hovering the chart / sorting a table failed: %r lacks %r" % (name, got, want))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gradprof, traces, out_dir = sys.argv[1:]
    if not os.access(CHROMIUM, os.X_OK):
        print("SKIPPED: %s is not installed (apt-get install chromium)" % CHROMIUM)
        return 77
    os.makedirs(out_dir, exist_ok=True)
    report = os.path.join(out_dir, "report.html")
    diff = os.path.join(out_dir, "diff.html")
    grad = os.path.join(traces, "mlp_grad.gptrace")
    nograd = os.path.join(traces, "mlp_nograd.gptrace")
    for cmd in ([gradprof, "report", grad, "--format", "html", "-o", report],
                [gradprof, "diff", grad, nograd, "--format", "html", "-o", diff]):
        rc, out, err = run(cmd)
        if rc != 0:
            fail("%s exited with %d: %s" % (" ".join(cmd), rc, err))
    scratch = tempfile.mkdtemp(prefix="gp_chromium.")
    try:
        check_page("report", report, out_dir, scratch)
        check_page("diff", diff, out_dir, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
