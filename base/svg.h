// base/svg.h: what every SVG picture of micropp shares (the Gantt charts of train/trace.c, the curves
// of plot.c): the page, escaped text, a text's width reckoned from its font size, titles wrapped to
// the picture's width so that no text runs past its edge, axis steps, the palette.
#pragma once
#include <stdio.h>

// The pictures use one monospace font (DejaVu Sans Mono where rsvg draws them): every character
// advances 0.602 em. A little more is reckoned, so that a font a bit wider still fits.
#define SVG_EM_PER_CHAR 0.62
#define SVG_FONT 11        // the page's font size (px)
#define SVG_TITLE_FONT 13  // a chart's or a panel's title, bold
#define SVG_LINE_MAX 512   // the longest line of a wrapped text

// Characters of s as drawn (UTF-8 sequences count once), and their width at font size px.
int svg_chars(const char *s);
double svg_text_width(const char *s, double font_px);
// Cuts s into lines of at most `width` px at font_px, at spaces (a word longer than a line is cut);
// writes up to max lines into lines, returns how many s needs (at least 1).
int svg_wrap(const char *s, double width, double font_px, char lines[][SVG_LINE_MAX], int max);
// The page: header, viewBox, a white background, the monospace font at SVG_FONT; and its end.
void svg_begin(FILE *f, double width, double height);
void svg_end(FILE *f);
void svg_escape(FILE *f, const char *s);  // s as XML character data or an attribute's value
// A bold title wrapped to `width` px from (x, top): one <text> whose lines are <tspan>s. Returns its
// height (line height 1.3 x font size per line); svg_title_height says it beforehand.
double svg_title(FILE *f, double x, double top, double width, double font_px, const char *text);
double svg_title_height(const char *text, double width, double font_px);
// An axis step: the smallest of 1, 2 or 5 times a power of ten that is at least `want` (> 0).
double svg_nice_step(double want);
// The palette (Tableau 10): colour i, cycling.
const char *svg_colour(int i);
