// base/svg.c: the helpers every SVG picture of micropp shares (svg.h): the page, escaped text, text
// widths from the font size, titles wrapped inside the picture, axis steps and the palette. No MPI,
// no model: train/trace.c's Gantt charts and plot.c's curves draw with them.
#include <math.h>
#include <string.h>
#include "base/svg.h"

int svg_chars(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;  // continuation bytes do not count
    return n;
}

double svg_text_width(const char *s, double font_px) { return svg_chars(s) * SVG_EM_PER_CHAR * font_px; }

// The longest prefix of s (its byte length) that holds at most `fit` characters.
static size_t prefix_bytes(const char *s, int fit) {
    size_t i = 0;
    for (int n = 0; s[i]; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80 && n++ == fit) break;
    }
    return i;
}

int svg_wrap(const char *s, double width, double font_px, char lines[][SVG_LINE_MAX], int max) {
    int fit = (int)(width / (SVG_EM_PER_CHAR * font_px));
    if (fit < 8) fit = 8;
    if (fit > SVG_LINE_MAX - 1) fit = SVG_LINE_MAX - 1;
    int n = 0;
    while (*s == ' ') s++;
    do {
        size_t len = strlen(s), cut = prefix_bytes(s, fit);
        if (cut < len) {  // break after the last " | " within the line, else at its last space, else in the word
            size_t sp = cut, bar = cut;
            while (sp > 0 && s[sp] != ' ') sp--;
            while (bar > 1 && !(s[bar] == ' ' && s[bar - 1] == '|')) bar--;
            if (bar > 1 && bar > cut / 2) cut = bar;
            else if (sp > 0) cut = sp;
        }
        if (n < max) {
            memcpy(lines[n], s, cut);
            lines[n][cut] = 0;
            while (cut > 0 && lines[n][cut - 1] == ' ') lines[n][--cut] = 0;
        }
        n++;
        s += cut;
        while (*s == ' ') s++;
    } while (*s);
    return n;
}

void svg_begin(FILE *f, double width, double height) {
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"DejaVu Sans Mono, monospace\" font-size=\"%d\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n",
            ceil(width), ceil(height), ceil(width), ceil(height), SVG_FONT, ceil(width), ceil(height));
}

void svg_end(FILE *f) { fprintf(f, "</svg>\n"); }

// The length of the well-formed UTF-8 character at s (1 to 4), or 0: a stray byte, a cut or overlong
// sequence, a surrogate, past U+10FFFF.
static int utf8_len(const unsigned char *s) {
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    int overlong = (n == 2 && s[0] < 0xC2) || (n == 3 && s[0] == 0xE0 && s[1] < 0xA0) ||
                   (n == 4 && s[0] == 0xF0 && s[1] < 0x90);
    int surrogate = n == 3 && s[0] == 0xED && s[1] >= 0xA0;
    int beyond = n == 4 && (s[0] > 0xF4 || (s[0] == 0xF4 && s[1] >= 0x90));
    if (overlong || surrogate || beyond) return 0;
    return n;
}

void svg_escape(FILE *f, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int n = utf8_len(u);
        if (*u == '<') fputs("&lt;", f);
        else if (*u == '>') fputs("&gt;", f);
        else if (*u == '&') fputs("&amp;", f);
        else if (*u == '"') fputs("&quot;", f);
        // XML has no place for control characters or bytes that are not UTF-8: U+FFFD stands in
        else if (!n || (*u < 0x20 && *u != '\t' && *u != '\n' && *u != '\r')) fputs("\xEF\xBF\xBD", f);
        else fwrite(u, 1, (size_t)n, f);
        u += n ? n : 1;
    }
}

#define TITLE_LINES 16
double svg_title_height(const char *text, double width, double font_px) {
    char lines[1][SVG_LINE_MAX];
    int n = svg_wrap(text, width, font_px, lines, 1);
    return (n < TITLE_LINES ? n : TITLE_LINES) * 1.3 * font_px;
}

double svg_title(FILE *f, double x, double top, double width, double font_px, const char *text) {
    static char lines[TITLE_LINES][SVG_LINE_MAX];
    int n = svg_wrap(text, width, font_px, lines, TITLE_LINES);
    if (n > TITLE_LINES) n = TITLE_LINES;
    fprintf(f, "<text class=\"title\" x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" font-weight=\"bold\">", x,
            top + 1.0 * font_px, font_px);
    for (int i = 0; i < n; i++) {
        fprintf(f, "<tspan x=\"%.1f\" dy=\"%.1f\">", x, i ? 1.3 * font_px : 0.0);
        svg_escape(f, lines[i]);
        fprintf(f, "</tspan>");
    }
    fprintf(f, "</text>\n");
    return n * 1.3 * font_px;
}

double svg_nice_step(double want) {
    if (!(want > 0 && want < INFINITY)) return 1;  // (0, NaN, infinite: no power of ten would end the loop)
    double p = pow(10, floor(log10(want)));
    for (;; p *= 10) {
        if (p >= want) return p;
        if (2 * p >= want) return 2 * p;
        if (5 * p >= want) return 5 * p;
    }
}

const char *svg_colour(int i) {
    static const char *const tableau[] = {"#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f",
                                          "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    int n = (int)(sizeof tableau / sizeof *tableau);
    return tableau[((i % n) + n) % n];
}
